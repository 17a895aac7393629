# syntax=docker/dockerfile:1
#
# Images of the detect project. One Dockerfile, three targets (see docs/deployment.md):
#
#   docker build --target serve-cpu -t detect:serve-cpu .   # small CPU server, default model baked in
#   docker build --target serve-gpu -t detect:serve-gpu .   # CUDA 13 + cuDNN + onnxruntime-gpu + TensorRT
#   docker build --target train     -t detect:train .       # torch + torchvision + DALI, for detect-train
#
# Every target installs the project the way the Makefile does: from this project's own pyproject.toml
# extras (a wheel built in the `wheel` stage, installed with uv into a virtualenv at /opt/venv) at the
# versions uv.lock pins (exported as constraints in the `wheel` stage), so two builds of one commit ship
# the same libraries. Serving images never contain PyTorch.
#
# Containers are configured with the same DETECT_* environment variables the service reads
# (service/settings.py); the images only set what differs from a laptop (bind 0.0.0.0, /models).

# Base images. CUDA_IMAGE: CUDA 13.0 runtime with cuDNN 9 on Ubuntu 24.04 (Python 3.12), matching the
# CUDA 13 builds this project pins (tensorrt-cu13, nvidia-dali-cuda130, torch's cu13 wheels).
# Pin them like the libraries: a release build passes the digests it resolved, so a rebuild of the same
# commit starts from the same bytes even when the tag has moved (docs/deployment.md, "Pinning images"):
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> \
#                --build-arg CUDA_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04@sha256:<digest> ...
ARG PYTHON_IMAGE=python:3.11-slim
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
# The installer the Makefile uses (uv), pinned.
ARG UV_VERSION=0.13.9

# ---------------------------------------------------------------------------------------------------
# uv: the installer, in its own virtualenv; later stages copy it, no final image keeps it.
FROM ${PYTHON_IMAGE} AS uv
ARG UV_VERSION
RUN python -m venv /opt/uv \
    && /opt/uv/bin/pip install --no-cache-dir "uv==${UV_VERSION}"

# ---------------------------------------------------------------------------------------------------
# wheel: the project as one pure-Python wheel (/wheels/detect-<version>-py3-none-any.whl), and the lock's
# versions as a constraints file (/wheels/constraints.txt) that every install below resolves within.
FROM uv AS wheel
WORKDIR /src
COPY pyproject.toml README.md uv.lock ./
COPY contract ./contract
COPY service ./service
COPY training ./training
COPY exporters ./exporters
COPY bench ./bench
RUN /opt/uv/bin/uv build --wheel --out-dir /wheels . \
    && /opt/uv/bin/uv export --frozen --all-extras --no-hashes --no-emit-project --output-file /wheels/constraints.txt

# ---------------------------------------------------------------------------------------------------
# train-venv: /opt/venv with the wheel and the `train,export` extras (torch, torchvision, DALI, onnx...).
FROM uv AS train-venv
COPY --from=wheel /wheels /wheels
RUN /opt/uv/bin/uv venv --python /usr/local/bin/python3 /opt/venv \
    && set -- /wheels/detect-*.whl \
    && /opt/uv/bin/uv pip install --no-cache --compile-bytecode --python /opt/venv/bin/python --constraint /wheels/constraints.txt "detect[train,export] @ file://$1"

# ---------------------------------------------------------------------------------------------------
# train: detect-train / detect-export / torchrun. Python 3.11 + PyTorch, torchvision, NVIDIA DALI
# (CUDA 13 build), pycocotools, onnx/onnxruntime for exporting. The CUDA user-space libraries come with
# the torch and DALI wheels (nvidia-* packages); the NVIDIA container toolkit injects the driver.
# Datasets and checkpoints come from volumes (/data, /checkpoints); see k8s/training/.
FROM ${PYTHON_IMAGE} AS train
LABEL org.opencontainers.image.title="detect-train" \
      org.opencontainers.image.description="detect-train and detect-export: PyTorch, torchvision, NVIDIA DALI (CUDA 13), ONNX" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.detect.target="train" \
      io.detect.extras="train,export"
RUN groupadd --system --gid 10001 detect \
    && useradd --system --uid 10001 --gid detect --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin detect
COPY --from=train-venv /opt/venv /opt/venv
# HOME and the caches point at /tmp, which Kubernetes mounts as an emptyDir (read-only root filesystem).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
WORKDIR /tmp
VOLUME ["/data", "/checkpoints"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["detect-train"]
CMD ["--help"]

# ---------------------------------------------------------------------------------------------------
# gpu-base: the CUDA 13 + cuDNN runtime image with the distribution's Python (3.12 on Ubuntu 24.04).
# Virtualenvs are made with `uv venv` (no python3-venv / pip needed, none left in the images).
FROM ${CUDA_IMAGE} AS gpu-base
ENV DEBIAN_FRONTEND=noninteractive
# DL3008 (pin apt package versions) is ignored here on purpose: Ubuntu's archive drops superseded
# versions, so exact pins break rebuilds; the base image tag pins the distribution release instead.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*

# serve-gpu-venv: /opt/venv with the wheel and the `serve-gpu` extra (onnxruntime-gpu, tensorrt).
FROM gpu-base AS serve-gpu-venv
COPY --from=uv /opt/uv/bin/uv /usr/local/bin/uv
COPY --from=wheel /wheels /wheels
RUN uv venv --python /usr/bin/python3 /opt/venv \
    && set -- /wheels/detect-*.whl \
    && uv pip install --no-cache --compile-bytecode --python /opt/venv/bin/python --constraint /wheels/constraints.txt "detect[serve-gpu] @ file://$1"

# ---------------------------------------------------------------------------------------------------
# serve-gpu: the GPU server. CUDA 13 runtime + cuDNN (base image), onnxruntime-gpu (CUDA and TensorRT
# execution providers) and TensorRT (native engines, model.plan), the detect package; NO PyTorch.
# The default ONNX model is baked in at /models too; in Kubernetes a PersistentVolumeClaim is mounted
# over /models (k8s/overlays/gpu). Run with the NVIDIA container toolkit:
#
#   docker run --rm --gpus all -p 8000:8000 detect:serve-gpu
FROM gpu-base AS serve-gpu
LABEL org.opencontainers.image.title="detect-serve-gpu" \
      org.opencontainers.image.description="detect-serve on NVIDIA GPUs: CUDA 13 + cuDNN, onnxruntime-gpu, TensorRT; no PyTorch" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.detect.target="serve-gpu" \
      io.detect.extras="serve-gpu"
RUN groupadd --system --gid 10001 detect \
    && useradd --system --uid 10001 --gid detect --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin detect \
    && mkdir -p /var/cache/detect/trt \
    && chown -R 10001:10001 /var/cache/detect
COPY --from=serve-gpu-venv /opt/venv /opt/venv
COPY --chown=10001:10001 models/ /models/
# LD_LIBRARY_PATH: the TensorRT execution provider dlopens libnvinfer, which the tensorrt wheel ships in
# site-packages/tensorrt_libs (not on the loader's default path). DETECT_TRT_CACHE_DIR keeps the engines
# the TensorRT EP builds, so a restart does not rebuild them (k8s mounts an emptyDir there).
# CUDA_CACHE_PATH: CUDA's kernel JIT cache on /tmp (an emptyDir in k8s; the root filesystem is read-only).
ENV PATH=/opt/venv/bin:$PATH \
    LD_LIBRARY_PATH=/opt/venv/lib/python3.12/site-packages/tensorrt_libs \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUDA_CACHE_PATH=/tmp/cuda-cache \
    DETECT_HOST=0.0.0.0 \
    DETECT_PORT=8000 \
    DETECT_MODEL_REPOSITORY=/models \
    DETECT_BACKEND=auto \
    DETECT_TRT_CACHE_DIR=/var/cache/detect/trt
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
VOLUME ["/models"]
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('DETECT_PORT', '8000'), timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["detect-serve"]

# ---------------------------------------------------------------------------------------------------
# serve-cpu-venv: /opt/venv with the wheel and the `serve` extra (onnxruntime CPU). No CUDA, no torch.
FROM uv AS serve-cpu-venv
COPY --from=wheel /wheels /wheels
RUN /opt/uv/bin/uv venv --python /usr/local/bin/python3 /opt/venv \
    && set -- /wheels/detect-*.whl \
    && /opt/uv/bin/uv pip install --no-cache --compile-bytecode --python /opt/venv/bin/python --constraint /wheels/constraints.txt "detect[serve] @ file://$1"

# ---------------------------------------------------------------------------------------------------
# serve-cpu: the small CPU server. python:3.11-slim + /opt/venv (`serve` extra) + the default model
# repository (models/, e.g. models/ssd300-synth/1/) baked in at /models, so `docker run` works alone:
#
#   docker run --rm -p 8000:8000 detect:serve-cpu
#
# Mount a model repository over /models to serve other models. Contains: Python 3.11, the detect
# package, FastAPI/uvicorn, onnxruntime (CPU), OpenCV headless, prometheus-client. No CUDA, no PyTorch.
FROM ${PYTHON_IMAGE} AS serve-cpu
LABEL org.opencontainers.image.title="detect-serve-cpu" \
      org.opencontainers.image.description="detect-serve on CPU: onnxruntime CPU, default model at /models; no CUDA, no PyTorch" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.detect.target="serve-cpu" \
      io.detect.extras="serve"
# The same non-root user (uid/gid 10001) in every image; k8s/base runs pods as this uid.
RUN groupadd --system --gid 10001 detect \
    && useradd --system --uid 10001 --gid detect --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin detect
COPY --from=serve-cpu-venv /opt/venv /opt/venv
COPY --chown=10001:10001 models/ /models/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DETECT_HOST=0.0.0.0 \
    DETECT_PORT=8000 \
    DETECT_MODEL_REPOSITORY=/models \
    DETECT_BACKEND=auto
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
VOLUME ["/models"]
# Liveness (GET /health/live); slim images have no curl, so a Python one-liner with urllib.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('DETECT_PORT', '8000'), timeout=4)"]
# detect-serve drains on SIGTERM (readiness false at once, in-flight requests finish within
# DETECT_DRAIN_TIMEOUT_S); exec form, so the signal reaches it as PID 1 without a shell in between.
STOPSIGNAL SIGTERM
ENTRYPOINT ["detect-serve"]

