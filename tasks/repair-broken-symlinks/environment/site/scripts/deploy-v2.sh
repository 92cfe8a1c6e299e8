#!/bin/bash
echo "deploying $(readlink -f /app/site/current)"
