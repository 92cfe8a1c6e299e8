#!/bin/bash
jq -r '.[] | select(.active == true and .role == "admin") | .email' /app/users.json | sort > /app/admin_emails.txt
cat /app/admin_emails.txt
