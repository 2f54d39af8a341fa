def points(wins, draws):
    return 3 * wins + draws
