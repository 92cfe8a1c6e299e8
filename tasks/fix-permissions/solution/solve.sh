#!/bin/bash
chmod 755 /app/scripts/*.sh
chmod 600 /app/config/secrets.env
