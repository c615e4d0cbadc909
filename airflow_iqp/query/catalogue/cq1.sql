select count(*) as totalorders from orders
