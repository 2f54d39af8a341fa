"""Honest fixes of linked_list.py: a Python list inside, other traversal."""


class LinkedList__algorithm:
    """The values kept in a Python list, front first."""

    def __init__(self, values=()):
        self._values = list(values)

    @property
    def size(self):
        return len(self._values)

    def push_front(self, value):
        self._values.insert(0, value)

    def to_list(self):
        return list(self._values)

    def find(self, value):
        try:
            return self._values.index(value)
        except ValueError:
            return -1

    def remove(self, value):
        if value in self._values:
            self._values.remove(value)
            return True
        return False


class LinkedList__flow:
    def __init__(self, values=()):
        self.head, self.size = None, 0
        for v in list(values)[::-1]:
            self.push_front(v)

    def push_front(self, value):
        self.head = Node(value, self.head)
        self.size += 1

    def _nodes(self):
        node = self.head
        while node:
            yield node
            node = node.next

    def to_list(self):
        return [node.value for node in self._nodes()]

    def find(self, value):
        for index, node in enumerate(self._nodes()):
            if node.value == value:
                return index
        return -1

    def remove(self, value):
        link = None
        for node in self._nodes():
            if node.value == value:
                if link is None:
                    self.head = node.next
                else:
                    link.next = node.next
                self.size -= 1
                return True
            link = node
        return False
