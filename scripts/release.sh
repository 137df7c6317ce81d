#!/usr/bin/env bash
# Builds the release: for each PLATFORM (os/arch) a static binary, packed with
# LICENSE, README.md and config.example.yaml into
# DIST/queuebox_<version>_<os>_<arch>.tar.gz, and DIST/SHA256SUMS listing the
# archives. The binaries stay in DIST/<os>_<arch>/queuebox (the Dockerfile
# copies the linux ones).
#
# Reproducible: the build date is the commit's time (or SOURCE_DATE_EPOCH),
# paths are trimmed, and the archives carry fixed names, order, times and
# owners, so two builds of one commit give the same SHA256SUMS
# (scripts/test-release.sh checks it).
#
# usage: scripts/release.sh [-b] VERSION DIST PLATFORM...
#   -b  binaries only, no archives or SHA256SUMS (make image)
# Needs git, GNU tar (TAR=gtar on macOS) and gzip.
set -euo pipefail

archives=1
if [[ ${1:-} == -b ]]; then
  archives=0
  shift
fi
if (($# < 3)); then
  echo "usage: $0 [-b] VERSION DIST PLATFORM..." >&2
  exit 2
fi
version=$1 dist=$2
shift 2
cd "$(dirname "$0")/.."

GO=${GO:-go}
TAR=${TAR:-tar}
export LC_ALL=C
# Matched from a variable: under pipefail, grep -q leaving at its match can
# end the writer with SIGPIPE and fail the pipeline.
if ((archives)) && ! grep -q 'GNU tar' <<<"$("$TAR" --version 2>/dev/null)"; then
  echo "release: $TAR is not GNU tar; set TAR=gtar" >&2
  exit 1
fi

revision=$(git rev-parse HEAD)
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  revision+=-dirty
  echo "release: the work tree has uncommitted changes: revision $revision" >&2
fi
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
built=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r "$epoch" +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w -X main.version=$version -X main.revision=$revision -X main.buildDate=$built"

mkdir -p "$dist"
built_archives=()
for platform in "$@"; do
  os=${platform%/*} arch=${platform#*/}
  bin="$dist/${os}_${arch}/queuebox"
  echo "release: $version $os/$arch"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=true -ldflags "$ldflags" -o "$bin" ./cmd/queuebox
  ((archives)) || continue

  name="queuebox_${version}_${os}_${arch}"
  stage=$(mktemp -d)
  mkdir -m 0755 "$stage/$name"
  install -m 0755 "$bin" "$stage/$name/queuebox"
  install -m 0644 LICENSE README.md config.example.yaml "$stage/$name/"
  "$TAR" --create --format=gnu --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    --mode='u=rwX,go=rX' -C "$stage" "$name" | gzip -n -9 >"$dist/$name.tar.gz"
  rm -rf "$stage"
  built_archives+=("$name.tar.gz")
done

if ((archives)); then
  (
    cd "$dist"
    if command -v sha256sum >/dev/null; then
      sha256sum "${built_archives[@]}"
    else
      shasum -a 256 "${built_archives[@]}"
    fi
  ) >"$dist/SHA256SUMS"
  echo "release: $dist/SHA256SUMS"
  cat "$dist/SHA256SUMS"
fi
