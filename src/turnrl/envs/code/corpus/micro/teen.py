def teen(age):
    return age >= 13 and age <= 19
