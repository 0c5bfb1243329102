import os
import platform
import shutil
import sys

from fastapi import APIRouter, status

router = APIRouter()


@router.get("/debug", status_code=status.HTTP_200_OK)
def get_debug_info_service():
    os_info = {
        "system": platform.system(),
        "node": platform.node(),
        "release": platform.release(),
        "version": platform.version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }

    env_vars = dict(os.environ)
    local_paths = {
        "current_working_directory": os.getcwd(),
        "sys_path": sys.path,
        "cwd_listing": os.listdir(os.getcwd()),
    }

    disk_usage = shutil.disk_usage(os.getcwd())
    disk_info = {
        "total": disk_usage.total,
        "used": disk_usage.used,
        "free": disk_usage.free,
        "percent": round(disk_usage.used * 100 / disk_usage.total, 1),
    }

    page_size = os.sysconf("SC_PAGE_SIZE")
    mem_total = page_size * os.sysconf("SC_PHYS_PAGES")
    mem_available = page_size * os.sysconf("SC_AVPHYS_PAGES")
    memory_info = {
        "total": mem_total,
        "available": mem_available,
        "used": mem_total - mem_available,
        "free": mem_available,
        "percent": round((mem_total - mem_available) * 100 / mem_total, 1),
    }

    debug_info = {
        "os_info": os_info,
        "env_vars": env_vars,
        "local_paths": local_paths,
        "disk_usage": disk_info,
        "memory_usage": memory_info,
    }

    return debug_info
