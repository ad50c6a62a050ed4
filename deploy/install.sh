#!/usr/bin/env bash
# Install Harvey Web as a systemd service on Raspberry Pi OS / Debian (arm64, x86_64).
#
#   sudo deploy/install.sh               install, or update from this checkout
#   sudo deploy/install.sh --uninstall   remove the service and the program;
#                                        keep sessions, workspace and config
#   deploy/install.sh --root DIR         install into DIR as if it were / : files only;
#                                        useradd, chown, pip and systemctl are printed, not run
#   deploy/install.sh --dry-run          print what would be done; change nothing
#
# Running it twice changes nothing: every file is compared before it is written,
# an existing /etc/harvey/harvey.yaml is never overwritten, and the service is
# restarted only when the program or the unit changed.
#
# Layout: /opt/harvey/src (this checkout's app, templates, static), /opt/harvey/venv
# (pip install -e of it), /etc/harvey/harvey.yaml, /var/lib/harvey (sessions,
# workspace, jobs, calibration, secret key, password hash), /etc/systemd/system/harvey.service.
set -euo pipefail

SERVICE=harvey
USER_NAME=harvey
PREFIX=/opt/harvey
CONF_DIR=/etc/harvey
DATA=/var/lib/harvey
UNIT=/etc/systemd/system/harvey.service

ROOT=""
DRY_RUN=no
UNINSTALL=no
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHANGED=0          # files and folders written in this run
PROGRAM_CHANGED=no # the source tree or the unit: the service must restart

usage() { sed -n '2,10s/^# \{0,1\}//p' "$0"; }
say() { printf '%s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --root) [ $# -ge 2 ] || die "--root needs a folder"; ROOT="$2"; shift 2 ;;
      --root=*) ROOT="${1#--root=}"; shift ;;
      --dry-run) DRY_RUN=yes; shift ;;
      --uninstall) UNINSTALL=yes; shift ;;
      --source) [ $# -ge 2 ] || die "--source needs a folder"; SOURCE="$2"; shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown option '$1' (see --help)" ;;
    esac
  done
  if [ -n "$ROOT" ]; then
    case "$ROOT" in /*) ;; *) ROOT="$(pwd)/$ROOT" ;; esac
    ROOT="${ROOT%/}"
    [ -n "$ROOT" ] || die "--root / is a real install: run without --root (as root)"
  fi
}

# Whether system commands (useradd, chown, pip, systemctl) really run.
real_system() { [ -z "$ROOT" ] && [ "$DRY_RUN" = no ]; }

# Run a system command, or print it in --root / --dry-run mode.
system() {
  local shown
  shown="$(printf '%q ' "$@")"
  if real_system; then say "+ ${shown% }"; "$@"; else say "would run: ${shown% }"; fi
}

# Write-once helpers: each compares before writing and counts real changes.
make_dir() {  # DIR MODE OWNER:GROUP
  local dir="$ROOT$1"
  if [ ! -d "$dir" ]; then
    if [ "$DRY_RUN" = yes ]; then say "would create $1"; else mkdir -p "$dir"; chmod "$2" "$dir"; say "created $1"; fi
    CHANGED=$((CHANGED + 1))
  fi
  set_owner "$1" "$3"
}

set_owner() {  # PATH OWNER:GROUP (real system only: a fake root has no such user)
  real_system || return 0
  [ "$(stat -c %U:%G "$1")" = "$2" ] || system chown "$2" "$1"
}

install_file() {  # SRC DEST MODE OWNER:GROUP ; returns 0 when it changed
  local dest="$ROOT$2"
  if [ -f "$dest" ] && cmp -s "$1" "$dest"; then
    say "unchanged $2"
    return 1
  fi
  if [ "$DRY_RUN" = yes ]; then
    say "would install $2"
  else
    install -D -m "$3" "$1" "$dest"
    say "installed $2"
    set_owner "$2" "$4"
  fi
  CHANGED=$((CHANGED + 1))
  return 0
}

check_platform() {
  case "$(uname -m)" in
    aarch64|arm64|x86_64|amd64) ;;
    *) say "warning: $(uname -m) is not tested (arm64 and x86_64 are); some wheels may need compiling" ;;
  esac
  [ -f "$SOURCE/app/__init__.py" ] && [ -d "$SOURCE/templates" ] && [ -d "$SOURCE/static" ] \
    || die "$SOURCE is not a Harvey Web checkout (no app/, templates/, static/)"
  if real_system; then
    [ "$(id -u)" -eq 0 ] || die "run as root (sudo $0), or use --root DIR / --dry-run"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || die "Python 3.11 or newer is needed (Raspberry Pi OS Bookworm has it)"
    python3 -c 'import ensurepip, venv' 2>/dev/null || system apt-get install -y python3-venv
  fi
}

ensure_user() {
  if real_system; then
    id -u "$USER_NAME" >/dev/null 2>&1 && return 0
  fi
  system useradd --system --user-group --home-dir "$DATA" --no-create-home \
    --shell /usr/sbin/nologin --comment "Harvey Web" "$USER_NAME"
}

# The top-level package folders pyproject.toml installs (app, harvey_demo): pip install -e
# stops when one named there is missing from the copy.
packaged_dirs() {
  sed -n '/^\[tool.setuptools\]/,/^\[/p' "$SOURCE/pyproject.toml" \
    | grep -o '"[A-Za-z_][A-Za-z0-9_]*[".]' | tr -d '".' | sort -u
}

# The app, templates and static files as they are in the checkout, in /opt/harvey/src.
sync_source() {
  local stage
  stage="$(mktemp -d)"
  tar -C "$SOURCE" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -cf - \
    $(packaged_dirs) templates static pyproject.toml harvey.yaml.example deploy $(cd "$SOURCE" && ls -d README* LICENSE* 2>/dev/null) \
    | tar -C "$stage" --no-same-owner -xf -
  chmod -R u=rwX,go=rX "$stage"
  if [ -d "$ROOT$PREFIX/src" ] && diff -rq -x __pycache__ -x '*.egg-info' -x build "$ROOT$PREFIX/src" "$stage" >/dev/null; then
    say "unchanged $PREFIX/src"
    rm -rf "$stage"
    return 0
  fi
  if [ "$DRY_RUN" = yes ]; then
    say "would copy the checkout to $PREFIX/src"
  else
    mkdir -p "$ROOT$PREFIX"
    rm -rf "$ROOT$PREFIX/src"
    mv "$stage" "$ROOT$PREFIX/src"
    chmod 0755 "$ROOT$PREFIX/src"
    say "copied the checkout to $PREFIX/src"
  fi
  rm -rf "$stage"
  CHANGED=$((CHANGED + 1))
  PROGRAM_CHANGED=yes
}

# The virtual environment, and the app installed into it from /opt/harvey/src.
ensure_venv() {
  local venv="$PREFIX/venv"
  if [ ! -x "$ROOT$venv/bin/python" ]; then
    system python3 -m venv "$venv"
    system "$venv/bin/pip" install --quiet --upgrade pip
    real_system && PROGRAM_CHANGED=yes
  fi
  if [ "$PROGRAM_CHANGED" = yes ] || [ ! -x "$ROOT$venv/bin/harvey" ]; then
    system "$venv/bin/pip" install --quiet -e "$PREFIX/src"
  fi
}

# /etc/harvey/harvey.yaml from the example, pointed at /var/lib/harvey; never overwritten.
ensure_config() {
  local dest="$CONF_DIR/harvey.yaml" stage
  make_dir "$CONF_DIR" 0750 "root:$USER_NAME"
  if [ -e "$ROOT$dest" ]; then
    say "kept your $dest"
    return 0
  fi
  stage="$(mktemp)"
  sed -e "s#^workspace: [^ ]*#workspace: $DATA/workspace#" \
      -e "s#^sessions_dir: [^ ]*#sessions_dir: $DATA/sessions#" \
      -e "s#^data_dir: [^ ]*#data_dir: $DATA#" \
      -e "s#^  host: 127\.0\.0\.1 #  host: 0.0.0.0   #" \
      "$SOURCE/harvey.yaml.example" >"$stage"
  for want in "^workspace: $DATA/workspace" "^sessions_dir: $DATA/sessions" "^data_dir: $DATA " "^  host: 0\.0\.0\.0 "; do
    grep -q "$want" "$stage" || { rm -f "$stage"; die "harvey.yaml.example changed shape: cannot set '$want'"; }
  done
  install_file "$stage" "$dest" 0640 "root:$USER_NAME" || true
  rm -f "$stage"
}

ensure_data() {
  make_dir "$DATA" 0750 "$USER_NAME:$USER_NAME"
  make_dir "$DATA/sessions" 0750 "$USER_NAME:$USER_NAME"
  make_dir "$DATA/workspace" 0750 "$USER_NAME:$USER_NAME"
}

ensure_service() {
  local unit_changed=no
  install_file "$SOURCE/deploy/harvey.service" "$UNIT" 0644 root:root && unit_changed=yes
  if [ "$unit_changed" = yes ]; then
    system systemctl daemon-reload
    PROGRAM_CHANGED=yes
  fi
  if real_system && systemctl is-enabled --quiet "$SERVICE" 2>/dev/null; then :; else
    system systemctl enable "$SERVICE.service"
  fi
  if [ "$PROGRAM_CHANGED" = yes ]; then
    system systemctl restart "$SERVICE.service"
  elif real_system && systemctl is-active --quiet "$SERVICE"; then
    say "the service is running"
  else
    system systemctl start "$SERVICE.service"
  fi
}

print_next_steps() {
  local config="$ROOT$CONF_DIR/harvey.yaml" port host
  # A dry run wrote no config: say what the one it would write says.
  [ -f "$config" ] || config="$SOURCE/harvey.yaml.example"
  port="$(sed -n 's/^  port: *\([0-9][0-9]*\).*/\1/p' "$config" | head -n 1)" || true
  host="$(sed -n 's/^  host: *\([^ #]*\).*/\1/p' "$config" | head -n 1)" || true
  [ -f "$ROOT$CONF_DIR/harvey.yaml" ] || host=0.0.0.0
  port="${port:-8080}"
  say ""
  say "Files: $CHANGED changed."
  if [ "${host:-127.0.0.1}" = 127.0.0.1 ] || [ "$host" = localhost ]; then
    say "Open http://127.0.0.1:$port/ on this machine (server.host in $CONF_DIR/harvey.yaml is loopback)."
  else
    say "Open http://$(hostname).local:$port/ on the LAN"
    for ip in $(hostname -I 2>/dev/null || true); do
      case "$ip" in *:*) say "  or http://[$ip]:$port/" ;; *) say "  or http://$ip:$port/" ;; esac
    done
  fi
  if [ ! -e "$ROOT$DATA/password" ]; then
    say "Set the password first (required on the LAN):"
    say "  sudo -u $USER_NAME $PREFIX/venv/bin/harvey --config $CONF_DIR/harvey.yaml set-password"
  fi
  say "Logs: journalctl -u $SERVICE -f"
}

uninstall() {
  local removed=0
  if [ -e "$ROOT$UNIT" ] || [ -e "$ROOT$PREFIX" ]; then
    system systemctl disable --now "$SERVICE.service"
  fi
  if [ -e "$ROOT$UNIT" ]; then
    if [ "$DRY_RUN" = yes ]; then say "would remove $UNIT"; else rm -f "$ROOT$UNIT"; say "removed $UNIT"; fi
    system systemctl daemon-reload
    removed=$((removed + 1))
  fi
  if [ -e "$ROOT$PREFIX" ]; then
    if [ "$DRY_RUN" = yes ]; then say "would remove $PREFIX"; else rm -rf "$ROOT$PREFIX"; say "removed $PREFIX"; fi
    removed=$((removed + 1))
  fi
  [ "$removed" -gt 0 ] || say "Harvey Web is not installed here: nothing to remove."
  say "Kept your sessions and workspace ($DATA), the config ($CONF_DIR) and the user '$USER_NAME'."
  say "To remove those too: sudo rm -rf $DATA $CONF_DIR && sudo userdel $USER_NAME"
}

main() {
  parse_args "$@"
  if [ -n "$ROOT" ] && [ "$DRY_RUN" = no ]; then mkdir -p "$ROOT"; fi
  if [ "$UNINSTALL" = yes ]; then
    uninstall
    return 0
  fi
  check_platform
  ensure_user
  ensure_data
  sync_source
  ensure_venv
  ensure_config
  ensure_service
  print_next_steps
}

main "$@"
