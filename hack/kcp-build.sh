#!/usr/bin/env bash
# Build `kcp`, `cache-server`, `kcp-front-proxy` and `virtual-workspaces` from the
# github.com/kcp-dev/kcp Go module at a release tag.
#
#   hack/kcp-build.sh VERSION OUT_DIR WORK_DIR
#
# KCP_STANDIN=0 skips the stand-in kcp-without-identitycache (built by default).
# KCP_ONLY="CMD..." builds only those commands of the module (e.g. virtual-workspaces) into
# OUT_DIR, each moved into place once complete: a binary added to a directory other
# worktrees run kcp from never shows half-written.
# KCP_MODULES overrides replaces of the wrapper, words of MODULE=VERSION (the published
# MODULE at VERSION, for a staging module the proxy serves only under a nearby version),
# MODULE=TARGET@VERSION (another module) or MODULE=none (no replace: a staging module no
# package of cmd/kcp imports, which the proxy does not serve).
#
# kcp's go.mod cannot be built with `go install`: it replaces every k8s.io module with
# kcp's kubernetes fork and points its staging modules (sdk, client-go, apimachinery/v2,
# code-generator/v3, virtual-workspace-framework, or ./sdk in older releases) at folders
# that are not in the module zip. The wrapper module in WORK_DIR copies the k8s.io
# replaces and pins each local replace to the module published for the same release
# (vN.<minor>.<patch> for a /vN module path). The fork's pseudo-versions are unknown to
# the public checksum database, so checksums of github.com/kcp-dev modules come from
# hack/kcp-VERSION.go.sum when present (recorded at the first successful build).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" kcp-build

VERSION="$1"
OUT_DIR="$2"
WORK="$3"
SUMS="${HACK_DIR}/kcp-${VERSION}.go.sum"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local GONOSUMDB=github.com/kcp-dev

json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" | head -1; }

info="$(go mod download -json "github.com/kcp-dev/kcp@${VERSION}")"
if grep -q '"Error"' <<<"${info}"; then
  log "kcp ${VERSION} is not available from the Go module proxy:"
  grep '"Error"' <<<"${info}" >&2
  exit 1
fi
mod_file="$(json_field GoMod <<<"${info}")"
commit="$(json_field Hash <<<"${info}")"
build_date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(json_field Info <<<"${info}")")"
kube_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' "${mod_file}")"
kube_minor="$(cut -d. -f2 <<<"${kube_version}")"

# Apply KCP_MODULES to the replace lines on stdin.
override_replaces() {
  awk -v overrides="${KCP_MODULES:-}" '
    BEGIN {
      n = split(overrides, words, " ")
      for (i = 1; i <= n; i++) { eq = index(words[i], "="); target[substr(words[i], 1, eq - 1)] = substr(words[i], eq + 1) }
    }
    $1 == "replace" && ($2 in target) {
      t = target[$2]
      seen[$2] = 1
      if (t == "none") next
      at = index(t, "@")
      if (at) { printf "replace %s => %s %s\n", $2, substr(t, 1, at - 1), substr(t, at + 1) } else { printf "replace %s => %s %s\n", $2, $2, t }
      next
    }
    { print }
    END { for (m in target) if (!(m in seen)) { print "KCP_MODULES names " m ", which kcp does not replace" > "/dev/stderr"; exit 1 } }'
}

mkdir -p "${WORK}" "${OUT_DIR}"
{
  printf 'module kcp-shard-operator/tools/kcp\n\ngo 1.23.0\n\nrequire github.com/kcp-dev/kcp %s\n\n' \
    "${VERSION}"
  # Remote replaces (the kubernetes fork), from blocks and single lines alike.
  sed -e 's/^replace[[:space:]]*//' "${mod_file}" |
    awk '$2 == "=>" && $3 !~ /^\.\.?\// && NF == 4 { printf "replace %s => %s %s\n", $1, $3, $4 }'
  # Local replaces: the same release of the published staging module.
  sed -e 's/^replace[[:space:]]*//' "${mod_file}" |
    awk -v v="${VERSION}" '$2 == "=>" && $3 ~ /^\.\.?\// {
      ver = v
      if (match($1, /\/v[0-9]+$/)) { ver = substr($1, RSTART + 1) substr(v, 3) }
      printf "replace %s => %s %s\n", $1, $1, ver
    }'
} | override_replaces >"${WORK}/go.mod"
if [[ -f "${SUMS}" ]]; then
  cp "${SUMS}" "${WORK}/go.sum"
fi
log "wrapper module in ${WORK}: $(grep -c '^replace' "${WORK}/go.mod") replaces, kubernetes ${kube_version}"
grep -E '^replace github.com/kcp-dev/' "${WORK}/go.mod" >&2 || true
[[ -z "${KCP_MODULES:-}" ]] || log "overridden (KCP_MODULES): ${KCP_MODULES}"

git_version="${kube_version}+kcp-${VERSION}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${git_version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${kube_minor}"
  ldflags+=" -X ${pkg}.gitCommit=${commit} -X ${pkg}.gitTreeState=clean"
  ldflags+=" -X ${pkg}.buildDate=${build_date}"
done

cd "${WORK}"
log "resolving modules ..."
go list -deps github.com/kcp-dev/kcp/cmd/kcp github.com/kcp-dev/kcp/cmd/cache-server \
  github.com/kcp-dev/kcp/cmd/kcp-front-proxy github.com/kcp-dev/kcp/cmd/virtual-workspaces >/dev/null

if [[ -n "${KCP_ONLY:-}" ]]; then
  staging="$(mktemp -d "${OUT_DIR}/.building-XXXXXX")"
  for cmd in ${KCP_ONLY}; do
    log "compiling github.com/kcp-dev/kcp/cmd/${cmd} (${git_version}) ..."
    go build -trimpath -ldflags "${ldflags}" -o "${staging}/${cmd}" "github.com/kcp-dev/kcp/cmd/${cmd}"
    mv "${staging}/${cmd}" "${OUT_DIR}/${cmd}"
  done
  rmdir "${staging}"
  exit 0
fi

# A stand-in for a shard past the deprecating release, which the module proxy does not
# serve: the same kcp with the identitycache controller not installed (nothing writes the
# ConfigMap any more), built from a patched copy of the module in a second wrapper.
kcp_dir="$(go list -m -f '{{.Dir}}' github.com/kcp-dev/kcp)"
if [[ "${KCP_STANDIN:-1}" != 0 ]] &&
  grep -q '^func (s \*Server) installApiExportIdentityController(' "${kcp_dir}/pkg/server/controllers.go"; then
  standin="${WORK}/without-identitycache"
  rm -rf "${standin}"
  mkdir -p "${standin}"
  cp -r "${kcp_dir}" "${standin}/kcp"
  chmod -R u+w "${standin}/kcp"
  awk '/^func \(s \*Server\) installApiExportIdentityController\(/ { found = 1 }
    found && /ShardName == corev1alpha1.RootShard \{/ { sub(/if .*\{/, "if true {"); found = 0 }
    { print }' "${kcp_dir}/pkg/server/controllers.go" >"${standin}/kcp/pkg/server/controllers.go"
  sed -e 's|^module .*|module kcp-shard-operator/tools/kcp-without-identitycache|' go.mod >"${standin}/go.mod"
  echo "replace github.com/kcp-dev/kcp => ./kcp" >>"${standin}/go.mod"
  cp go.sum "${standin}/go.sum"
  log "compiling kcp-without-identitycache (stand-in for a post-deprecation shard) ..."
  (cd "${standin}" && go build -trimpath \
    -ldflags "${ldflags//+kcp-${VERSION}/+kcp-${VERSION}-without-identitycache}" \
    -o "${OUT_DIR}/kcp-without-identitycache" github.com/kcp-dev/kcp/cmd/kcp)
  "${OUT_DIR}/kcp-without-identitycache" --version >&2
fi

log "compiling github.com/kcp-dev/kcp/cmd/kcp, cmd/cache-server, cmd/kcp-front-proxy and cmd/virtual-workspaces (${git_version}) ..."
go build -trimpath -ldflags "${ldflags}" -o "${OUT_DIR}/" \
  github.com/kcp-dev/kcp/cmd/kcp github.com/kcp-dev/kcp/cmd/cache-server \
  github.com/kcp-dev/kcp/cmd/kcp-front-proxy github.com/kcp-dev/kcp/cmd/virtual-workspaces
if [[ ! -f "${SUMS}" ]]; then
  cp go.sum "${SUMS}"
  log "recorded module checksums in ${SUMS}"
fi
"${OUT_DIR}/kcp" --version >&2
