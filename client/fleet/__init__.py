"""Many servers at once: the balancing policy (pure), the dispatcher (slots, health, rotation) and the start-up
checks.
"""
