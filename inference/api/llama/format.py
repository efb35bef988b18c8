"""llama-server's native completion shape (its /completion and /infill replies), for /infill.

Whole: {"content", "stop": true, "stop_type": "eos" | "limit" | "word", "stopping_word",
"tokens_predicted", "tokens_evaluated", "tokens_cached", "prompt", "model", ...}. Streamed: one
`data:` event per piece ({"content", "tokens", "stop": false}), then the whole object with empty
content and `stop: true`; no `[DONE]`, as llama-server ends its streams.
"""

from __future__ import annotations

import dataclasses

from ...serving.jobs import GenerationJob
from ..common import sse


@dataclasses.dataclass
class LlamaCompletionReply:
    request_id: str
    model: str
    job: GenerationJob
    prompt_text: str

    def failed(self) -> GenerationJob | None:
        return self.job if self.job.finish_reason == "error" else None

    def _final(self, content: str) -> dict:
        job, choice = self.job, self.job.choices[0]
        if choice.finish_reason == "length":
            stop_type, word = "limit", ""
        elif isinstance(choice.stop_reason, str):
            stop_type, word = "word", choice.stop_reason
        else:
            stop_type, word = "eos", ""
        return {
            "index": 0,
            "id": self.request_id,
            "content": content,
            "tokens": [],
            "id_slot": -1,
            "stop": True,
            "model": self.model,
            "tokens_predicted": job.completion_tokens,
            "tokens_evaluated": job.prompt_tokens or len(job.prompt_token_ids),
            "tokens_cached": job.cached_tokens,
            "prompt": self.prompt_text,
            "has_new_line": "\n" in choice.text,
            "truncated": False,
            "stop_type": stop_type,
            "stopping_word": word,
        }

    def body(self) -> dict:
        return self._final(self.job.choices[0].text)

    async def finish(self) -> dict:
        return self.body()

    async def stream(self):
        job = self.job
        try:
            async for out in job:
                if out.text:
                    yield sse.event(
                        {"index": 0, "content": out.text, "tokens": list(out.token_ids), "stop": False, "id_slot": -1}
                    )
            await job.wait_recorded()
            if job.finish_reason in ("error", "abort"):
                yield sse.event({"error": {"code": 500, "message": job.error or "generation failed", "type": "server_error"}})
                return
            yield sse.event(self._final(""))
        finally:
            await job.close()
