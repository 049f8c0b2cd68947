# autoglm-serve on an NVIDIA CUDA runtime image: built in a CUDA devel image,
# run on the runtime one, port 8080, with a health check on /health.
#   docker build -t open-autoglm .
#   docker run --gpus all -p 8080:8080 -v /models/glm-4-9b-chat:/model -e MODEL_NAME=glm-4-9b-chat open-autoglm
#   docker run --gpus all -p 8000:8000 -v /models/AutoGLM-Phone-9B:/model open-autoglm --port 8000 \
#     --served-model-name autoglm-phone-9b --max-model-len 25480 --chat-template-content-format string \
#     --limit-mm-per-prompt '{"image":10}' --mm-processor-kwargs '{"max_pixels":5000000}'   (the phone agent's model)
# (Not built or run by CI: the development machine has no Docker and no GPU.)
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      meson ninja-build g++ pkg-config libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libboost-dev \
      nlohmann-json3-dev libpcre2-dev libpng-dev libjpeg-turbo8-dev libwebp-dev libdeflate-dev libssl-dev \
      && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN meson setup build --buildtype=release && ninja -C build tools/autoglm-serve

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
# Abseil, PCRE2 and the image libraries are linked statically; the CUDA runtime and NCCL come with this image;
# OpenSSL and the CA bundle verify https image URLs (--allow-remote-media).
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl \
      ca-certificates libssl3t64 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/tools/autoglm-serve /usr/local/bin/autoglm-serve
# The model directory (config.json, safetensors, tokenizer) is mounted here; the settings come
# from the environment (flags win): MODEL_DIR, MODEL_NAME, PORT, API_KEY, MAX_MEMORY_GB, LOG_LEVEL.
ENV MODEL_DIR=/model PORT=8080 LOG_LEVEL=info
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${PORT}/health" || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["autoglm-serve", "--device", "cuda", "--host", "0.0.0.0"]
