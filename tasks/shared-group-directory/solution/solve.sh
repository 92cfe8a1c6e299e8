#!/bin/bash
set -euo pipefail
groupadd -g 3100 analytics
useradd -m -d /home/carol -s /bin/bash -G analytics carol
usermod -a -G analytics bob
chgrp -R analytics /srv/analytics
chmod 2770 /srv/analytics
id bob; id carol; ls -ld /srv/analytics
