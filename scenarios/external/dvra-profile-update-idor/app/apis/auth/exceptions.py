class UserAlreadyExistsException(Exception):
    pass
