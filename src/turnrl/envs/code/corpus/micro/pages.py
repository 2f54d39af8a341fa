def pages(items, per_page):
    return (items + per_page - 1) // per_page
