"""Threadline's console: a Panel app over the engine_adapter read model."""
