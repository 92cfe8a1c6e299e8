"""Third-party client, vendored as is. Do not edit: it is replaced wholesale on upgrade."""
