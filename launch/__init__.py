"""regen-swarm launchers: the GPU-node layout planner, start/stop scripts, presets and the simulated server."""
