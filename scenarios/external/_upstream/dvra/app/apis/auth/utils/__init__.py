from .jwt_auth import *
from .roles_based_auth_checker import RolesBasedAuthChecker
from .utils import *
