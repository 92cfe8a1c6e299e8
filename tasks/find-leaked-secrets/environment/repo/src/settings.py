"""Runtime settings."""

import os

DEBUG = False
ALLOWED_HOSTS = ['shop.example.com']

# AWS
AWS_REGION = 'eu-central-1'
# TODO move to the secret store
AWS_SECRET_NAME = 'shop/prod'
AWS_ACCESS_KEY_ID = 'AKIAC14AN35RKC75UEPX'

# example from the docs: AKIAEXAMPLE is not a real key
TIMEOUT_S = 30
