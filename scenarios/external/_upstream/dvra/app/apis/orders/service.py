from apis.orders.services.create_order_service import router as create_order_router
from apis.orders.services.get_order_service import router as get_order_router
from apis.orders.services.get_order_status import router as get_order_status_router
from apis.orders.services.get_orders_for_delivery_service import (
    router as get_orders_for_delivery_router,
)
from apis.orders.services.get_orders_service import router as get_orders_router
from fastapi import APIRouter

router = APIRouter()
router.include_router(create_order_router)
router.include_router(get_order_router)
router.include_router(get_order_status_router)
router.include_router(get_orders_router)
router.include_router(get_orders_for_delivery_router)
