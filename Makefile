# One-command set-up, training and tests without ROS (see README.md).
#   make train   create .venv, install pinned dependencies, run the trainer
#   make test    same set-up, then the whole test suite (ament linters included)
#   make ros-test  with a ROS 2 setup file sourced: build a throw-away workspace, run the
#                  ROS tests (test/ros_test.sh)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PKG := async_rl_ros
ARGS ?=
PYTEST_ARGS ?=
# Debian/Ubuntu ship the ROS 2 copyright linter and the ROS IDL parser (python3-rosidl, which
# the message tests use) only as system packages; the venv can see them.
DEBIAN_SITE := /usr/lib/python3/dist-packages

.PHONY: setup train test ros-test bench clean

setup: $(STAMP)

$(STAMP): requirements.txt $(PKG)/setup.py
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10) and "Python >= 3.10 needed")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: CI machines take 2.13.0 as a CPU wheel (no CUDA download).
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e $(PKG)
	@if [ -d $(DEBIAN_SITE)/ament_copyright ]; then \
	  mkdir -p $(VENV)/debian-linters && \
	  ln -sfn $(DEBIAN_SITE)/ament_copyright $(DEBIAN_SITE)/ament_copyright-*info \
	    $(VENV)/debian-linters/ && \
	  if [ -d $(DEBIAN_SITE)/rosidl_adapter ]; then \
	    ln -sfn $(DEBIAN_SITE)/rosidl_adapter $(VENV)/debian-linters/; fi && \
	  $(BIN)/python -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + \
	    "/debian-linters.pth", "w").write(sys.argv[1] + "\n")' \
	    "$(abspath $(VENV))/debian-linters"; \
	fi
	touch $@

train: $(STAMP)
	$(BIN)/async-rl-train $(ARGS)

# pytest runs from the package directory, as colcon test does, so the ament linter tests
# check the package exactly as they would in a ROS workspace.
test: $(STAMP)
	cd $(PKG) && ../$(BIN)/python -m pytest -ra $(PYTEST_ARGS)

ros-test:
	bash $(PKG)/test/ros_test.sh $(PYTEST_ARGS)

bench: $(STAMP)
	for b in bench/[!_]*.py; do $(BIN)/python $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) $(PKG)/build $(PKG)/*.egg-info
