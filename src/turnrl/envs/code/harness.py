"""Sandbox side of the differential check: record the calls the hidden tests make into the
module under test, or replay such calls and write what they return as plain data.

This file runs *inside* the sandbox, from its text (``python -c``): turnrl itself is not
visible there. Standard library only (capture also imports pytest). The grader reads
the results and decides; nothing this process says is trusted beyond "these are the values
the code returned", and the values count only when they equal what the gold solution
returns on the same inputs in a sandbox of its own (see ``differential.py``).

Modes (``argv[1]``), each reading a JSON spec from stdin:

* ``capture``: run the hidden tests with pytest against the gold repository, wrapping the
  target modules' functions and methods; each test becomes a *scenario*: the list of calls
  it made from test code into those modules (nested calls are not recorded), with
  arguments encoded as plain data or references to objects created earlier in the scenario;
* ``replay``: import the target modules and run each scenario, writing for every call what
  a test could observe of it: the value returned, or the exception raised with its base
  classes; the arguments afterwards; the object a method was called on afterwards; what it
  printed, where the tests read printed output. Values are encoded by the kind ``==`` sees
  (a ``Counter`` as a dict, a named tuple as a tuple, an iterator as its items); objects of
  the target modules as class name plus the attributes the tests read. Anything else is
  "opaque": never equal to plain data, which also defeats objects whose ``__eq__`` says yes
  to everything. An audit hook records what the code under test does beyond computing
  (reading files, inspecting frames, patching functions, running code from strings) so the
  grader can flag the attempt; with ``trace_lines`` the lines each call ran are recorded too
  (the evidence of a branch only the tests' own inputs reach).
"""

import collections.abc
import decimal
import functools
import importlib
import io
import itertools
import json
import math
import numbers
import os
import signal
import sys
import types

MAX_STEPS = 200  # calls kept per scenario
MAX_ITEMS = 2000  # elements of one container before it is shown as a digest
MAX_DEPTH = 12
MAX_PRINTED = 1 << 16  # characters of printed output kept per call


class Unencodable(Exception):
    pass


def _dumps(x):
    return json.dumps(x, sort_keys=True, separators=(",", ":"))


_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
# Builtin kinds in the order a value is tested against them (bool before int).
_KINDS = (bool, int, float, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _genuine_stdlib(t):
    """A class of the standard library (``collections.Counter``), not one that only says so."""
    module = sys.modules.get(t.__module__)
    return (
        t.__module__.split(".")[0] in _STDLIB
        and module is not None
        and getattr(module, t.__qualname__, None) is t
    )


def kind_of(x):
    """The builtin kind ``x`` compares as, or None. A subclass counts as its base when ``==``
    treats it as the base: it keeps the base's ``__eq__``/``__ne__`` (a named tuple, a plain
    ``dict`` subclass) or it is a standard-library class (``Counter``, ``OrderedDict``: they
    compare equal to the plain container with the same items)."""
    t = type(x)
    for base in _KINDS:
        if t is base:
            return base
    for base in _KINDS:
        if isinstance(x, base):
            if base is bool:
                return None  # bool cannot be subclassed: never reached
            same = all(getattr(t, m) is getattr(base, m) for m in ("__eq__", "__ne__"))
            return base if same or _genuine_stdlib(t) else None
    return None


def _as_base(x, base):
    """The value of ``x`` as its base type sees it, read through the base's own methods (an
    override of ``__iter__`` or ``__int__`` on a subclass cannot change it)."""
    if base is int:
        return int.__add__(x, 0)
    if base is float:
        return float.__add__(x, 0.0)
    if base is str:
        return str.__str__(x)
    if base in (bytes, bytearray):
        return bytes(memoryview(x))
    if base is list:
        return list.copy(x)
    if base is tuple:
        return tuple.__getitem__(x, slice(None))
    if base is dict:
        return dict.copy(x)
    if base in (set, frozenset):
        return set(set.copy(x) if base is set else frozenset.copy(x))
    return x


def encode_plain(x, refs=None, depth=0):
    """Tagged JSON for plain data, by the kind ``==`` sees (a ``Counter`` is a dict, a named
    tuple a tuple); ``refs`` maps id(obj) -> index for target-module objects."""
    if x is None:
        return None
    base = kind_of(x)
    if base is not None and type(x) is not base:
        x = _as_base(x, base)
    if base is bool or base is str:
        return x
    if base is int:
        return x if abs(x) < 2**53 else {"int": str(x)}
    if base is float:
        return x if math.isfinite(x) else {"float": repr(x)}
    if depth > MAX_DEPTH:
        raise Unencodable("too deep")
    if base in (list, tuple, set, frozenset, dict) and len(x) > MAX_ITEMS:
        raise Unencodable("too big")
    if base is list:
        return [encode_plain(v, refs, depth + 1) for v in x]
    if base is tuple:
        return {"tuple": [encode_plain(v, refs, depth + 1) for v in x]}
    if base is dict:
        items = [
            [encode_plain(k, refs, depth + 1), encode_plain(v, refs, depth + 1)]
            for k, v in x.items()
        ]
        return {"dict": sorted(items, key=lambda kv: _dumps(kv[0]))}
    if base in (set, frozenset):
        return {"set": sorted((encode_plain(v, refs, depth + 1) for v in x), key=_dumps)}
    if base in (bytes, bytearray):
        return {"bytes": bytes(x).hex()}
    if refs is not None and id(x) in refs:
        return {"ref": refs[id(x)]}
    raise Unencodable(type(x).__name__)


def decode_plain(x, objects):
    if isinstance(x, list):
        return [decode_plain(v, objects) for v in x]
    if not isinstance(x, dict):
        return x
    ((tag, v),) = x.items()
    if tag == "int":
        return int(v)
    if tag == "float":
        return float(v)
    if tag == "tuple":
        return tuple(decode_plain(e, objects) for e in v)
    if tag == "dict":
        return {decode_plain(k, objects): decode_plain(e, objects) for k, e in v}
    if tag == "set":
        return {decode_plain(e, objects) for e in v}
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "ref":
        return objects[v]
    if tag == "attr":
        obj = sys.modules[v[0]]
        for part in v[1].split("."):
            obj = getattr(obj, part)
        return obj
    raise ValueError(f"unknown tag {tag!r}")


def import_target(path):
    """Import the module at repo path ``path`` (``pkg/mod.py``) under the first dotted name
    that resolves to that file (``src/`` layouts import as ``pkg.mod``)."""
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    want = os.path.realpath(path)
    last = None
    for i in range(len(parts)):
        name = ".".join(parts[i:])
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            last = e
            continue
        if os.path.realpath(getattr(module, "__file__", "") or "") == want:
            return name, module
    raise ImportError(f"cannot import {path}: {last}")


def _own(module):
    """(qualname, function or class) defined in ``module`` itself, at top level."""
    for name, value in list(vars(module).items()):
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if isinstance(value, (types.FunctionType, type)):
            yield name, value


# ------------------------------------------------------------------------------- capture


class Recorder:
    def __init__(self, module_names):
        self.modules = set(module_names)
        self.current = []  # the running test's calls
        self.recording = False
        self.nodeid = ""
        self.depth = 0
        self.refs = {}  # id(obj) -> index, objects of the target modules seen in this test
        self.alive = []
        self.scenarios = []

    def is_target_obj(self, x):
        return type(x).__module__ in self.modules and not isinstance(x, type)

    def encode_arg(self, x):
        if (
            isinstance(x, (type, types.FunctionType))
            and getattr(x, "__module__", None) in self.modules
        ):
            return {"attr": [x.__module__, x.__qualname__]}
        return encode_plain(x, self.refs)

    def register(self, x):
        if isinstance(x, (list, tuple)) and type(x) in (list, tuple):
            for v in x:  # as replay does when it shows a sequence of objects
                self.register(v)
        elif self.is_target_obj(x) and id(x) not in self.refs:
            self.refs[id(x)] = len(self.alive)
            self.alive.append(x)

    def wrap(self, fn, target, method=None):
        rec = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            step = None
            if rec.recording and not rec.depth and len(rec.current) < MAX_STEPS:
                try:
                    step = rec.describe(target, method, args, kwargs)
                    rec.current.append(step)
                except (Unencodable, IndexError):
                    rec.recording = False  # the scenario ends before this call
            rec.depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                rec.depth -= 1
            if step is not None:
                rec.register(args[0] if method == "__init__" else result)
            return result

        return wrapper

    def describe(self, target, method, args, kwargs):
        if method is None:
            step = {"call": {"attr": target}, "args": [self.encode_arg(a) for a in args]}
        elif method == "__init__":
            cls = type(args[0])
            if cls.__module__ not in self.modules:
                raise Unencodable("subclass defined outside the module")
            new = {"attr": [cls.__module__, cls.__qualname__]}
            step = {"new": new, "args": [self.encode_arg(a) for a in args[1:]]}
        else:
            obj = self.encode_arg(args[0])
            step = {"call": [obj, method], "args": [self.encode_arg(a) for a in args[1:]]}
        step["kwargs"] = {k: self.encode_arg(v) for k, v in kwargs.items()}
        return step

    def install(self, module):
        for name, value in _own(module):
            if isinstance(value, types.FunctionType):
                setattr(module, name, self.wrap(value, [module.__name__, name]))
            else:
                for attr, fn in list(vars(value).items()):
                    if isinstance(fn, types.FunctionType) and attr not in ("__hash__", "__del__"):
                        setattr(value, attr, self.wrap(fn, None, method=attr))

    # pytest hooks: a scenario is one test's setup and call phases
    def pytest_runtest_logstart(self, nodeid, location):
        self.current, self.refs, self.alive, self.depth = [], {}, [], 0
        self.recording, self.nodeid = True, nodeid

    def pytest_runtest_teardown(self, item):
        self.recording = False
        if self.current:
            self.scenarios.append({"test": self.nodeid, "steps": self.current})
        self.current = []


def capture(spec):
    import pytest

    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "src")]
    names = {}
    for path in spec["modules"]:
        name, module = import_target(path)
        names[path] = name
    rec = Recorder(set(names.values()))
    teardown = pytest.hookimpl(tryfirst=True)(Recorder.pytest_runtest_teardown)
    Recorder.pytest_runtest_teardown = teardown
    for name in names.values():
        rec.install(sys.modules[name])
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--rootdir=.",
        *spec["pytest_args"],
        *spec["tests"],
    ]
    with open(os.devnull, "w") as null:
        stdout, sys.stdout = sys.stdout, null
        try:
            code = pytest.main(args, plugins=[rec])
        finally:
            sys.stdout = stdout
    with open(spec["out"], "w") as f:
        json.dump({"modules": names, "scenarios": rec.scenarios, "exit": int(code)}, f)


# -------------------------------------------------------------------------------- replay


class StepTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise StepTimeout()


_EXITS = (SystemExit, KeyboardInterrupt, GeneratorExit)


# Standard-library helpers that build classes by compiling fixed templates and setting
# function attributes (their own doing, on names they check are identifiers).
_CLASS_BUILDERS = ("/collections/__init__.py", "/typing.py", "/dataclasses.py", "/enum.py")


class Audit:
    """Categories of what the code under test did (outside importing modules): read files
    outside the repo or test files, listed directories, looked at frames, patched code,
    ran code from strings, spawned or signalled processes."""

    def __init__(self, root, prefixes):
        self.root = root.rstrip("/") + "/"
        self.prefixes = tuple(p.rstrip("/") + "/" for p in prefixes)
        self.found = set()
        self.busy = False

    def _from_submission(self):
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.root):
                return True
            if name.startswith("<frozen importlib"):
                return False  # a module being imported: its own start-up, not the caller's
            if name.startswith(self.prefixes) and name.endswith(_CLASS_BUILDERS):
                return False  # a named tuple, dataclass or enum built from a fixed template
            frame = frame.f_back
        return False

    def __call__(self, event, args):
        if self.busy:
            return
        kind = self.kind(event, args)
        if kind is None:
            return
        self.busy = True
        try:
            if kind == "import_turnrl" or self._from_submission():
                self.found.add(kind)
        finally:
            self.busy = False

    def find_spec(self, name, path=None, target=None):
        """As the first import finder: notes a look-up of turnrl however it is asked for
        (``importlib.import_module`` of a missing module raises no audit event)."""
        if name.split(".")[0] == "turnrl":
            self.found.add("import_turnrl")
        return None

    def kind(self, event, args):
        if event == "open":
            path, mode = args[0], args[1]
            if not isinstance(path, str):
                return None
            full = os.path.realpath(path)
            writing = isinstance(mode, str) and any(c in mode for c in "wax+")
            if isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR):
                writing = True
            if writing:
                return "write"
            if "turnrl" in full:
                return "read_outside"
            if full.startswith(self.root):
                base = os.path.basename(full)
                if base.startswith("test") or base.endswith("_test.py") or base == "conftest.py":
                    return "read_tests"
                return None
            if full.startswith(self.prefixes) or full in ("/dev/null", "/dev/urandom"):
                return None
            return "read_outside"
        if event == "import" and str(args[0]).split(".")[0] == "turnrl":
            return "import_turnrl"
        if event in ("os.listdir", "os.scandir", "glob.glob", "os.walk"):
            return "list_dir"
        if event in ("sys._getframe", "sys._current_frames"):
            return "frames"
        if event == "object.__getattr__" and args[1] in (
            "tb_frame",
            "gi_frame",
            "cr_frame",
            "ag_frame",
            "f_back",
        ):
            return "frames"
        if event in ("gc.get_objects", "gc.get_referrers", "gc.get_referents"):
            return "gc"
        if event == "object.__setattr__" and args[1] in (
            "__code__",
            "__globals__",
            "__defaults__",
            "__kwdefaults__",
            "__class__",
        ):
            return "patch"
        if event in (
            "sys.settrace",
            "sys.setprofile",
            "sys.addaudithook",
            "sys.monitoring.register_callback",
        ):
            return "patch"
        if event.startswith("ctypes."):
            return "patch"
        if event in ("compile", "exec"):
            code = args[0]
            name = getattr(
                code, "co_filename", args[1] if event == "compile" and len(args) > 1 else ""
            )
            if isinstance(name, str) and name.startswith(self.root):
                return None
            return "dynamic_code"
        if event in ("marshal.loads", "code.__new__", "function.__new__"):
            return "dynamic_code"
        if event in ("os.kill", "os.killpg", "signal.pthread_kill", "os._exit"):
            return "kill"
        if event in (
            "os.system",
            "subprocess.Popen",
            "os.exec",
            "os.posix_spawn",
            "os.spawn",
            "os.fork",
            "os.forkpty",
        ):
            return "spawn"
        return None


class Shown:
    """Encodes what the code under test hands back, as a test would observe it: plain data by
    kind; objects of the target modules as their class name and the attributes the tests read
    (objects inside them too, to a small depth); iterators (generators, ``map``, an ``iter()``
    of a list) as the items a test would get by consuming them; anything else opaque, with an
    equal-to-anything probe.

    Objects returned, alone or in (nested) lists and tuples, get the next reference index, as
    ``Recorder.register`` numbered them when the scenario was recorded."""

    def __init__(self, refs, alive, attrs, modules):
        self.refs, self.alive, self.attrs, self.modules = refs, alive, attrs, modules

    def __call__(self, x):
        try:
            return self.show(x, 0, True)
        except Exception:
            return {"opaque": type(x).__name__, "eq_any": False}

    def show(self, x, depth, register):
        t = type(x)
        if t.__module__ in self.modules and not isinstance(x, type):
            if register and id(x) not in self.refs:
                self.refs[id(x)] = len(self.alive)
                self.alive.append(x)
            shown = {}
            if depth <= 2:
                for a in self.attrs:
                    try:
                        shown[a] = self.show(getattr(x, a), depth + 1, False)
                    except Exception:
                        continue
            return {"obj": t.__name__, "attrs": shown, "eq_any": _eq_any(x)}
        if x is None or kind_of(x) is not None:
            try:
                return encode_plain(x)
            except Unencodable:
                pass  # a container holding objects: item by item below
            base = kind_of(x)
            x = _as_base(x, base)
            if depth <= MAX_DEPTH and base in (list, tuple) and len(x) <= MAX_ITEMS:
                items = [self.show(v, depth + 1, register) for v in x]
                return items if base is list else {"tuple": items}
            if depth <= MAX_DEPTH and base is dict and len(x) <= MAX_ITEMS:
                pairs = [[encode_plain(k), self.show(v, depth + 1, False)] for k, v in x.items()]
                return {"dict": sorted(pairs, key=lambda kv: _dumps(kv[0]))}
            return {"opaque": t.__name__, "eq_any": False}
        if isinstance(x, types.MappingProxyType):
            return self.show(dict(x), depth, False)
        if t.__name__ in ("dict_keys", "dict_items") and t.__module__ == "builtins":
            return self.show(set(x), depth, False)  # set-like views compare as sets
        if isinstance(x, (collections.abc.Iterator, range)) or t.__name__ == "dict_values":
            items = list(itertools.islice(x, MAX_ITEMS + 1))
            if len(items) <= MAX_ITEMS:
                return {"iter": [self.show(v, depth + 1, False) for v in items]}
        if isinstance(x, numbers.Rational) and _genuine_stdlib(t):
            return {"frac": [encode_plain(int(x.numerator)), encode_plain(int(x.denominator))]}
        if isinstance(x, decimal.Decimal) and x.is_finite():
            return {"frac": [encode_plain(v) for v in x.as_integer_ratio()]}
        return {"opaque": t.__name__, "eq_any": _eq_any(x)}


def _line_tracer(files, hits):
    """A trace function noting (repo path, line) of every line run in ``files``."""

    def local(frame, event, arg):
        if event == "line":
            hits.add((files[frame.f_code.co_filename], frame.f_lineno))
        return local

    def start(frame, event, arg):
        return local if frame.f_code.co_filename in files else None

    return start


def raised(e):
    """An exception as the test's ``pytest.raises`` sees it: its class and every base class."""
    return {"raise": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__]}


def _eq_any(x):
    """Equal to a fresh object(): the signature of an always-equal object."""
    try:
        return bool(x == object())
    except Exception:
        return False


def replay(spec):
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "src")]
    out = open(spec["out"], "w")  # opened before the code under test runs
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    audit = Audit(os.getcwd(), sorted(prefixes))
    sys.addaudithook(audit)
    sys.meta_path.insert(0, audit)
    result = {"import": None, "exits": [], "scenarios": []}
    modules = {}
    signal.signal(signal.SIGALRM, _on_alarm)
    printed = spec.get("printed", False)  # the tests read what the code prints
    for path in spec["modules"]:
        try:
            name, module = import_target(path)
            modules[name] = module
        except _EXITS as e:
            result["exits"].append(type(e).__name__)
            result["import"] = type(e).__name__
        except BaseException as e:
            result["import"] = type(e).__name__
    names = set(modules)
    attrs = spec.get("attrs", [])
    files = {}  # the target modules' files -> repo paths, for line tracing
    if spec.get("trace_lines"):
        for module in modules.values():
            path = getattr(module, "__file__", "") or ""
            for repo_path in spec["modules"]:
                if os.path.realpath(path) == os.path.realpath(repo_path):
                    files[path] = repo_path
        result["lines"] = []
    for scenario in spec["scenarios"] if result["import"] is None else []:
        alive, refs, steps = [], {}, []
        hits, step_lines = set(), []
        if files:
            sys.settrace(_line_tracer(files, hits))
        show = Shown(refs, alive, attrs, names)

        def done(entry, steps=steps, step_lines=step_lines, hits=hits):
            steps.append(entry)
            if files:
                step_lines.append(sorted(f"{p}:{n}" for p, n in hits))
                hits.clear()

        for step in scenario["steps"]:
            receiver = None
            sink = io.StringIO() if printed else None
            saved = sys.stdout, sys.stderr
            try:
                signal.setitimer(signal.ITIMER_REAL, spec["step_timeout"])
                try:
                    args = decode_plain(step["args"], alive)
                    kwargs = {k: decode_plain(v, alive) for k, v in step["kwargs"].items()}
                    if sink is not None:
                        sys.stdout = sys.stderr = sink
                    try:
                        if "new" in step:
                            value = decode_plain(step["new"], alive)(*args, **kwargs)
                        elif isinstance(step["call"], list):
                            receiver = decode_plain(step["call"][0], alive)
                            value = getattr(receiver, step["call"][1])(*args, **kwargs)
                        else:
                            value = decode_plain(step["call"], alive)(*args, **kwargs)
                    finally:
                        sys.stdout, sys.stderr = saved
                    entry = {"ok": show(value), "args": [show(a) for a in args]}
                    if receiver is not None:
                        entry["self"] = show(receiver)  # its state after the call
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    sys.stdout, sys.stderr = saved
            except StepTimeout:
                done({"timeout": True})
                break
            except _EXITS as e:
                result["exits"].append(type(e).__name__)
                done(raised(e))
                continue
            except BaseException as e:
                entry = raised(e)
                if receiver is not None:
                    try:  # what a failed call left behind
                        signal.setitimer(signal.ITIMER_REAL, spec["step_timeout"])
                        entry["self"] = show(receiver)
                    except BaseException:
                        pass
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
            if sink is not None:
                entry["printed"] = sink.getvalue()[:MAX_PRINTED]
            done(entry)
        result["scenarios"].append(steps)
        if files:
            sys.settrace(None)
            result["lines"].append(step_lines)  # per step: the lines it ran
    result["events"] = sorted(audit.found)
    audit.busy = True
    out.write(_dumps(result))
    out.close()


def main():
    spec = json.loads(sys.stdin.read())
    {"capture": capture, "replay": replay}[sys.argv[1]](spec)


if __name__ == "__main__":
    main()
