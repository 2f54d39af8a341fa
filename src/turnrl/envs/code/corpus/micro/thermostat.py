def thermostat(temp):
    if temp < 18:
        return "heat"
    return "cool" if temp > 24 else "off"
