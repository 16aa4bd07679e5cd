"""Hopper (sm_90a) lowering rules: wgmma and its matrix descriptors, TMA copies and mbarriers, the
persistent tile loop.  Importing a module registers its rules in ``codegen/lowering.py``'s table."""
