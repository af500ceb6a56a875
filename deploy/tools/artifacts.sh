#!/usr/bin/env bash
# Builds and checks loopwatch's installable artifacts, offline, with Debian's packages:
#
#   1. `cargo package --locked --no-verify`: the crate's metadata and file list publish.
#   2. `cargo install --locked --path .`: the install path the README gives, into a
#      scratch prefix (release profile, with the image's overrides below).
#   3. The container image, FROM scratch with buildah (no base image to download): the
#      installed binary, the shared libraries `ldd` names, CA certificates, a nonroot user
#      (65532, as distroless' `nonroot`), the Dockerfile's ports, entrypoint and command.
#      Saved as an OCI archive (target/artifacts/loopwatch-VERSION.oci.tar).
#   4. The image run: `podman run` where the kernel lets it; otherwise (a container
#      without CAP_SYS_RESOURCE, where crun cannot set rlimits) the image's own root
#      filesystem, mounted by buildah, run with its entrypoint and command in new PID,
#      mount, UTS and IPC namespaces as uid 65532 (unshare + chroot). Then `/readyz` must
#      answer 200 and `/metrics` name the version, and SIGTERM must drain it.
#
# Prints one summary line: image size, how it ran, seconds taken. Every missing tool
# (cargo, buildah, podman or unshare+chroot, curl, ldd) is an error: this script never
# skips a step. Debian: `apt-get install buildah podman curl`.
#
# Usage: deploy/tools/artifacts.sh            (from anywhere; CI: .ci/run)
#   LOOPWATCH_IMAGE_BINARY=path  use this binary instead of steps 1-2 (e.g. a release build)
#   LOOPWATCH_IMAGE_KEEP=1       keep the image in the script's buildah storage
#   LOOPWATCH_INSTALL_PROFILE=dev  step 2 with --debug in ./target (reuses cargo test's
#                                  build; what CI does), the image's binary stripped
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
say() { echo "artifacts: $*"; }
die() { echo "artifacts: error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 not found ($2)"; }

need cargo "a Rust toolchain"
need buildah "apt-get install buildah"
need curl "apt-get install curl"
need ldd "libc-bin"
version=$(cargo metadata --no-deps --format-version 1 --offline |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="loopwatch"))')

out=target/artifacts
work=$(mktemp -d)
storage=(--storage-driver vfs --root "$work/storage" --runroot "$work/run")
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    # The server, whichever way it runs (unshare's child dies with it: --kill-child).
    pkill -KILL -P "$server_pid" 2>/dev/null || true
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [ -z "${LOOPWATCH_IMAGE_KEEP:-}" ]; then
    buildah "${storage[@]}" rm --all >/dev/null 2>&1 || true
    buildah "${storage[@]}" rmi --all --force >/dev/null 2>&1 || true
    rm -rf "$work" 2>/dev/null || true
  fi
}
trap cleanup EXIT
mkdir -p "$out"

# 1-2. The crate and the install path.
if [ -n "${LOOPWATCH_IMAGE_BINARY:-}" ]; then
  binary=$LOOPWATCH_IMAGE_BINARY
  [ -x "$binary" ] || die "LOOPWATCH_IMAGE_BINARY=$binary is not an executable"
else
  cargo package --locked --no-verify --allow-dirty --quiet
  crate="target/package/loopwatch-$version.crate"
  [ -s "$crate" ] || die "cargo package wrote no $crate"
  say "cargo package: $crate, $(du -k "$crate" | cut -f1) KiB, $(tar -tzf "$crate" | wc -l) files"
  # The Dockerfile's build settings: no debug info (Cargo.toml keeps line tables for
  # profiling), the standard library's stripped too; symbol names stay for backtraces.
  if [ "${LOOPWATCH_INSTALL_PROFILE:-release}" = dev ]; then
    # The same command with --debug, built in this checkout's target/ so that it reuses
    # what `cargo test` built (CI: a second, fat-LTO release build would take a quarter
    # of its time); debug info is stripped from the image's copy below.
    CARGO_TARGET_DIR="$PWD/target" \
      cargo install --locked --path . --debug --root "$work/install" --bin loopwatch --quiet --force
  else
    CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo \
      cargo install --locked --path . --root "$work/install" --bin loopwatch --quiet --force
  fi
  binary="$work/install/bin/loopwatch"
  "$binary" --version >/dev/null || die "the installed binary does not run"
  say "cargo install --locked --path .: $("$binary" --version), $(du -k "$binary" | cut -f1) KiB"
fi

# 3. The root filesystem: the binary, its shared libraries (and the loader) at the paths
# ldd resolves them to, CA certificates, the nonroot user, an empty /tmp.
rootfs="$work/rootfs"
install -D -m 0755 "$binary" "$rootfs/usr/local/bin/loopwatch"
if [ "${LOOPWATCH_INSTALL_PROFILE:-release}" = dev ]; then
  need objcopy "binutils, to strip the debug build's debug info"
  objcopy --strip-debug "$rootfs/usr/local/bin/loopwatch"
fi
libs=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
[ -n "$libs" ] || die "ldd named no libraries for $binary"
for lib in $libs; do
  # The library and, when it is a symlink, what it points at.
  cp --parents -L "$lib" "$rootfs/"
done
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
fi
mkdir -p "$rootfs/etc" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"

# The Dockerfile's runtime settings (tests/process/artifacts.rs keeps the two in step).
image="localhost/loopwatch:$version"
ctr=$(buildah "${storage[@]}" from scratch)
buildah "${storage[@]}" copy --quiet "$ctr" "$rootfs" / >/dev/null
buildah "${storage[@]}" config \
  --entrypoint '["/usr/local/bin/loopwatch"]' --cmd serve --user 65532:65532 \
  --port 4317 --port 4318 --port 8787 \
  --label org.opencontainers.image.title=loopwatch \
  --label "org.opencontainers.image.version=$version" \
  --label org.opencontainers.image.licenses=Apache-2.0 "$ctr"
buildah "${storage[@]}" commit --quiet --rm "$ctr" "$image" >/dev/null
archive="$out/loopwatch-$version.oci.tar"
rm -f "$archive"
buildah "${storage[@]}" push --quiet "$image" "oci-archive:$archive:loopwatch:$version"
size_mb=$(du -k "$rootfs" | tail -1 | awk '{ printf "%.1f", $1 / 1024 }')
archive_mb=$(du -k "$archive" | awk '{ printf "%.1f", $1 / 1024 }')
say "image $image: $size_mb MB unpacked ($(echo "$libs" | wc -w) shared libraries), OCI archive $archive $archive_mb MB"

# 4. Run it.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
admin=$(free_port); grpc=$(free_port); http=$(free_port)
args=(--admin-listen "127.0.0.1:$admin" --grpc-listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http")
log="$work/serve.log"
how=
if command -v podman >/dev/null && podman "${storage[@]}" run --rm --network host "$image" --version >/dev/null 2>"$work/podman.err"; then
  how="podman run"
  podman "${storage[@]}" run --rm --network host --name loopwatch-artifacts "$image" serve "${args[@]}" >"$log" 2>&1 &
  server_pid=$!
else
  [ -s "$work/podman.err" ] && say "podman run cannot start containers here ($(tail -1 "$work/podman.err")); running the image's root filesystem in namespaces instead"
  need unshare "util-linux"
  need chroot "coreutils"
  need pkill "procps"
  how="unshare + chroot of the image's root filesystem"
  run_ctr=$(buildah "${storage[@]}" from "$image")
  mnt=$(buildah "${storage[@]}" mount "$run_ctr")
  # The image's own entrypoint and user, from its OCI config.
  config=$(buildah "${storage[@]}" inspect --type image "$image")
  entrypoint=$(python3 -c 'import json,sys; print(" ".join(json.loads(sys.argv[1])["OCIv1"]["config"]["Entrypoint"]))' "$config")
  user=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["OCIv1"]["config"]["User"])' "$config")
  unshare --fork --pid --mount --uts --ipc --kill-child=SIGKILL \
    chroot --userspec="$user" "$mnt" $entrypoint serve "${args[@]}" >"$log" 2>&1 &
  server_pid=$!
fi
ready=
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.2
done
[ -n "$ready" ] || { cat "$log" >&2; die "the image did not answer /readyz on 127.0.0.1:$admin ($how)"; }
curl -fsS "http://127.0.0.1:$admin/metrics" | grep -q "loopwatch_build_info{.*version=\"$version\"" ||
  die "/metrics of the running image has no loopwatch_build_info for $version"
if [ "$how" = "podman run" ]; then
  podman "${storage[@]}" stop --time 15 loopwatch-artifacts >/dev/null
else
  # unshare --fork ignores SIGTERM while it waits for its child: signal loopwatch itself
  # (the child of unshare, by parent pid).
  pkill -TERM -P "$server_pid" || die "no loopwatch process under unshare ($server_pid)"
fi
# Wait for the drain's last line, then for the process.
stopped=
for _ in $(seq 1 75); do
  if grep -q "loopwatch stopped" "$log"; then stopped=1; break; fi
  sleep 0.2
done
wait "$server_pid" || true
server_pid=
[ -n "$stopped" ] || { cat "$log" >&2; die "the image did not drain and stop on SIGTERM"; }
say "ok: image $image $size_mb MB (archive $archive_mb MB), /readyz 200 via $how, in $(($(date +%s) - started)) s"
