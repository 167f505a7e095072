"""(not yet built)"""


def add_arguments(parser):
    pass


def run(args):
    raise SystemExit("this command is not built yet")
