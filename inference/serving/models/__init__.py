"""Many models, one server: the catalogue (which models exist, by name), the registry (which are
loaded, loading them on demand, unloading the least recently used and the idle ones) and the
keep-alive rule. A server started with one model is a catalogue of one."""
