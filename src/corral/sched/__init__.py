"""corral.sched"""
