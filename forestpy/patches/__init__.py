"""Batched patch storage and the operations between patches (ghosts, regrid, time sync)."""

from forestpy.patches.boundary import apply_physical_bc, normalize_bc
from forestpy.patches.geometry import PatchGeometry
from forestpy.patches.ghost_plan import GhostPlan, build_ghost_plan, fill_ghosts
from forestpy.patches.regrid import transfer
from forestpy.patches.time_sync import TimeSyncPlan, apply_time_sync, build_time_sync_plan

__all__ = [
    "PatchGeometry",
    "GhostPlan",
    "build_ghost_plan",
    "fill_ghosts",
    "apply_physical_bc",
    "normalize_bc",
    "transfer",
    "TimeSyncPlan",
    "build_time_sync_plan",
    "apply_time_sync",
]
