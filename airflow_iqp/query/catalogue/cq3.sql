select count(*) as totalitems, l_suppkey from lineitem group by l_suppkey
