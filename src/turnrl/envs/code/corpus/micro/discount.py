def discount(price, percent):
    return price - price * percent // 100
