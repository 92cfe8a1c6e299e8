#!/bin/bash
cd /app/site
find . -xtype l -printf '%p -> %l\n'
ln -sfn releases/v1.4.0 current
ln -sfn ../shared/conf/app.conf config/app.conf
ln -sfn ../shared/assets-2024 public/static
ln -sfn ../scripts/deploy-v2.sh bin/deploy
rm tmp/cache
find . -xtype l
./bin/deploy
