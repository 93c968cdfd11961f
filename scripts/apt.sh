# Sourced by install steps: apt_install PKG... runs `apt-get update` once per run, then installs.
apt_install() {
  if ! command -v apt-get >/dev/null; then
    echo "sluice: need Debian packages $*; apt-get is not available here, install them by hand" >&2
    exit 1
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if [ ! -e /tmp/.sluice-apt-updated ]; then
    $sudo apt-get update -qq && touch /tmp/.sluice-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
