select count(*) as totalitems, l_partkey from lineitem group by l_partkey
