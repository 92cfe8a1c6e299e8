#!/bin/bash
sqlite3 -header -csv /app/shop.db "
SELECT ROW_NUMBER() OVER (ORDER BY SUM(i.quantity * i.unit_price_cents) DESC, c.id) AS rank,
       c.id AS customer_id, c.name, c.country,
       printf('%.2f', SUM(i.quantity * i.unit_price_cents) / 100.0) AS revenue
FROM customers c
JOIN orders o ON o.customer_id = c.id
JOIN order_items i ON i.order_id = o.id
WHERE o.status = 'completed' AND o.order_date >= '2023-01-01' AND o.order_date < '2024-01-01'
GROUP BY c.id
ORDER BY rank
LIMIT 5;" > /app/top_customers.csv
cat /app/top_customers.csv
