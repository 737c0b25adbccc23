#!/usr/bin/env bash
# llama.cpp's two benches for the GPU calls (gguf_peer_bench's peer), built on this CPU machine so that
# no device time goes on the build: the sources as ../shared/tools/llamacpp-peer.sh fetches them, compiled
# for sm_90 with this machine's CUDA 13.0 nvcc, packed as .peer/llamacpp-bin.tar.xz (about 42 MB) for a
# call's `carry`, where step.sh's peer_unpack puts it back at /tmp/llamacpp-build.
# This machine's CUDA has no cuBLAS and no driver: cuBLAS's headers and libraries come from NVIDIA's
# wheel (nvidia-cublas 13.x; the libraries' symbols carry the version tag libcublas.so.13, so the GPU
# machine's own cuBLAS 13 loads at run time), and an empty libcuda.so stub with the driver's soname stands
# in for the link (--no-as-needed keeps libcuda.so.1 needed; executables may leave its symbols to it).
# Both go into /usr/local/cuda: a throwaway machine's toolkit. About 25 minutes on 2 cores. The build
# is llamacpp-peer.sh's own, with the two linker flags added and every core used (it keeps two spare).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
CUDA=/usr/local/cuda; BUILD=/tmp/llamacpp-build; CUBLAS=nvidia-cublas==13.10.0.20
grep -qx '/.peer/' .git/info/exclude || echo '/.peer/' >> .git/info/exclude
[[ -d .peer/src ]] || bash ../shared/tools/llamacpp-peer.sh fetch .peer/src
if [[ ! -e $CUDA/lib64/libcublas.so ]]; then
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
        --platform manylinux2014_x86_64 "$CUBLAS" -d "$tmp"
    python3 -m zipfile -e "$tmp"/nvidia_cublas-*.whl "$tmp/x"
    cp "$tmp"/x/nvidia/cu13/include/*.h $CUDA/include/
    cp "$tmp"/x/nvidia/cu13/lib/libcublas*.so.13 $CUDA/lib64/
    ln -sf libcublas.so.13 $CUDA/lib64/libcublas.so; ln -sf libcublasLt.so.13 $CUDA/lib64/libcublasLt.so
    rm -rf "$tmp"
fi
if [[ ! -e $CUDA/lib64/stubs/libcuda.so ]]; then
    mkdir -p $CUDA/lib64/stubs
    echo "" | gcc -shared -fPIC -x c -Wl,-soname,libcuda.so.1 -o $CUDA/lib64/stubs/libcuda.so -
fi
rm -rf $BUILD
cmake -S .peer/src -B $BUILD -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--no-as-needed > $BUILD.cmake.log
nice -n 10 cmake --build $BUILD -j "$(nproc)" --target llama-bench llama-batched-bench > $BUILD.build.log
tar -C $BUILD -cf - bin | xz -T0 -6 > .peer/llamacpp-bin.tar.xz
ls -la .peer/llamacpp-bin.tar.xz
