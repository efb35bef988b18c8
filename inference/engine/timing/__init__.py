"""Where the engine's time goes: a decode step's phases (step_times.py), a model load's (start_phases.py)."""
