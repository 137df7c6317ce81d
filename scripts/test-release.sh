#!/usr/bin/env bash
# Checks that make release is reproducible: two clones of HEAD, in different
# directories, build the release and must give the same SHA256SUMS. Then
# checks what an archive holds and that its binary reports the version.
# Uncommitted changes are not part of the test: it builds the commit.
#
# usage: scripts/test-release.sh [VERSION]   (make test-release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-v0.0.0-reproducible}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for n in a bb; do
  git clone --quiet --shared "$root" "$tmp/$n/queuebox"
  (cd "$tmp/$n/queuebox" && make --no-print-directory release VERSION="$version" DIST="$tmp/dist-$n") >"$tmp/$n.log" 2>&1 ||
    { cat "$tmp/$n.log"; exit 1; }
done
if ! cmp -s "$tmp/dist-a/SHA256SUMS" "$tmp/dist-bb/SHA256SUMS"; then
  echo "test-release: two builds of $(git -C "$root" rev-parse --short HEAD) differ:" >&2
  diff "$tmp/dist-a/SHA256SUMS" "$tmp/dist-bb/SHA256SUMS" >&2 || true
  exit 1
fi
(cd "$tmp/dist-a" && sha256sum --check --quiet SHA256SUMS)
for platform in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64; do
  grep -q " queuebox_${version}_${platform}.tar.gz\$" "$tmp/dist-a/SHA256SUMS" ||
    { echo "test-release: SHA256SUMS lacks $platform" >&2; exit 1; }
done

archive="$tmp/dist-a/queuebox_${version}_linux_amd64.tar.gz"
want="queuebox_${version}_linux_amd64/
queuebox_${version}_linux_amd64/LICENSE
queuebox_${version}_linux_amd64/README.md
queuebox_${version}_linux_amd64/config.example.yaml
queuebox_${version}_linux_amd64/queuebox"
got=$(tar -tzf "$archive")
if [[ $got != "$want" ]]; then
  printf 'test-release: %s holds\n%s\nwant\n%s\n' "$archive" "$got" "$want" >&2
  exit 1
fi
tar -xzf "$archive" -C "$tmp"
bin="$tmp/queuebox_${version}_linux_amd64/queuebox"
if [[ $(uname -s)/$(uname -m) == Linux/x86_64 ]]; then
  "$bin" version
  "$bin" version | grep -q "^queuebox $version\$" || { echo "test-release: the binary does not report $version" >&2; exit 1; }
  "$bin" version | grep -q "revision: *$(git -C "$root" rev-parse HEAD)\$" || { echo "test-release: wrong revision" >&2; exit 1; }
fi
if file "$bin" 2>/dev/null | grep -q dynamically; then
  echo "test-release: $bin is dynamically linked" >&2
  exit 1
fi
echo "test-release: two builds of $(git -C "$root" rev-parse --short HEAD) gave the same SHA256SUMS:"
cat "$tmp/dist-a/SHA256SUMS"
