"""Planning before launch: parameters, FLOPs, memory per device, step time, days, checkpoint interval."""
from pretrain.plan.planner import Plan, format_plan, plan

__all__ = ["Plan", "format_plan", "plan"]
