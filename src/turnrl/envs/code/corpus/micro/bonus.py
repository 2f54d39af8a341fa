def bonus(sales):
    if sales > 1000:
        return sales // 10
    return 0
