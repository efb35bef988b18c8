from tests.serving.engine_fixtures import no_engine, runner, session_runner, tiny_config  # noqa: F401  (fixtures)
