"""docker/Dockerfile's CMake configure line, as the image builds it, run here (no Docker engine
is needed to configure): with this machine's CUDA toolkit, cuDNN and NCCL it must pass, and with
cuDNN or NCCL left out (BURST_CUDNN=OFF, BURST_NCCL=OFF) BURST_REQUIRE_GPU_LIBS must stop it, so
that the image cannot build without them. Skips where nvcc is missing, or where a plain CUDA
configure finds no cuDNN or NCCL (optional for a local build)."""
import os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not (shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")):
    print("skip: no nvcc")
    sys.exit(77)

text = open(os.path.join(ROOT, "docker", "Dockerfile")).read().replace("\\\n", " ")
args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
runs = [line[4:] for line in text.splitlines() if line.startswith("RUN ") and "cmake -S . -B build" in line]
assert len(runs) == 1, runs
configure = next(cmd.strip() for cmd in runs[0].split("&&") if cmd.strip().startswith("cmake -S . -B build"))
configure = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], configure)
print("Dockerfile configure:", configure)

with tempfile.TemporaryDirectory() as build:
    plain = subprocess.run(["cmake", "-S", ".", "-B", build, "-DBURST_CUDA=ON"], cwd=ROOT, capture_output=True, text=True)
    found = [lib for lib in ("NCCL", "cuDNN") if f"burst: {lib} ON /" in plain.stdout]
    if len(found) < 2:
        print(f"skip: this machine's CUDA configure found {found or 'neither of'} NCCL and cuDNN")
        sys.exit(77)

failures = 0
for extra, want_ok, want_text in [("", True, "burst: cuDNN ON /"),
                                  ("-DBURST_CUDNN=OFF", False, "BURST_REQUIRE_GPU_LIBS: no cuDNN"),
                                  ("-DBURST_NCCL=OFF", False, "BURST_REQUIRE_GPU_LIBS: no NCCL")]:
    with tempfile.TemporaryDirectory() as build:
        cmd = configure.replace("-B build", "-B " + build) + " " + extra
        r = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True)
        out = r.stdout + r.stderr
        ok = (r.returncode == 0) == want_ok and want_text in out
        print("%s configure %s: rc %d, %r %s" % ("ok  " if ok else "FAIL", extra or "as written", r.returncode,
                                                 want_text, "found" if want_text in out else "missing"))
        if not ok:
            print(out[-3000:])
        failures += not ok
print("%s: %d failures" % ("FAIL" if failures else "ok", failures))
sys.exit(1 if failures else 0)
