select count(*) as totalorders, o_orderpriority from orders group by o_orderpriority
