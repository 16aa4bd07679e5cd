"""The Hopper wing of the pipeline (sm_90a): warpgroup MMA operand layouts, TMA staging on mbarriers,
wgmma fences, warp specialization and the persistent grid.  ``passes/pipeline.py`` inserts these passes
at named points of the core list; each does nothing unless the target has the capability it needs."""
