#!/usr/bin/env bash
# Builds relay's release artifacts into dist/ (run from the repository root,
# by 'make dist'): a tar.gz for linux and darwin on amd64 and arm64, a .deb
# and an .rpm for linux on amd64 and arm64 (nfpm), and SHA256SUMS.
#
# VERSION (default: the latest v* tag without its v, else internal/version's
# default), COMMIT (git rev-parse HEAD) and DATE (now, UTC) are baked into the
# binaries; NFPM is the pinned nfpm to run (nfpm.yaml reads VERSION and ARCH).
set -euo pipefail

: "${NFPM:?NFPM must name the nfpm to run}"
if [ -z "${VERSION:-}" ]; then
	VERSION=$(git describe --tags --match 'v[0-9]*' 2>/dev/null | sed 's/^v//' || true)
fi
if [ -z "$VERSION" ]; then
	VERSION=$(sed -n 's/^const defaultVersion = "\(.*\)"$/\1/p' internal/version/version.go)
fi
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
	COMMIT="$COMMIT-dirty"
fi
DATE=${DATE:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
export VERSION

pkg=github.com/relaydev/relay/internal/version
ldflags="-s -w -X $pkg.Version=$VERSION -X $pkg.Commit=$COMMIT -X $pkg.Date=$DATE"

rm -rf dist
mkdir -p dist
echo "relay $VERSION, commit $COMMIT, built $DATE"
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${target%/*} arch=${target#*/}
	name=relay_${VERSION}_${os}_${arch}
	mkdir -p "dist/build/$name"
	echo "build $target"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false -tags urfave_cli_no_docs \
		-ldflags "$ldflags" -o "dist/build/$name/relay" ./cmd/relay
	cp README.md LICENSE "dist/build/$name/"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$DATE" \
		-C dist/build -cf - "$name" | gzip -n > "dist/$name.tar.gz"
	if [ "$os" = linux ]; then
		# nfpm expands no variables in a file's source: the binary goes where
		# nfpm.yaml looks for it.
		cp "dist/build/$name/relay" dist/build/relay
		for format in deb rpm; do
			ARCH=$arch $NFPM package \
				--config deploy/packaging/nfpm.yaml --packager "$format" --target dist/
		done
	fi
done
rm -rf dist/build
(cd dist && sha256sum -- *.tar.gz *.deb *.rpm > SHA256SUMS)
ls -l dist
