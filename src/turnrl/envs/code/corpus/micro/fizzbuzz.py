def fizzbuzz(n):
    if n % 3 == 0:
        return "Fizz" if n % 5 else "FizzBuzz"
    return "Buzz" if n % 5 == 0 else str(n)
