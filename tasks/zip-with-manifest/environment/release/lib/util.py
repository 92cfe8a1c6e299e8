import sys


def main(argv):
    print("tool 2.1", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
