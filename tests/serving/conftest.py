from tests.serving.engine_fixtures import engine_client, no_engine, session_engine_client, tiny_config  # noqa: F401  (fixtures)
