"""Scale-out mode (MINIVLLM_ENGINE=remote): engines run as `manage.py runengine` processes and web
processes reach them over the Channels layer (Redis), through the same interface as EngineThread.

protocol.py  channel names and the wire form of requests/outputs (plain dicts for msgpack)
fleet.py     what a web process knows about the engines it hears from, and their aggregate stats
client.py    RemoteEngine: the web process's stand-in for EngineThread
worker.py    EngineWorker: an EngineThread fed from the shared request channel
"""
