"""Student t and normal quantiles from published tables (and scipy): the known values the statistics tests check
rfteval's own t (stats.tdist) and what is built on it (stats.paired's intervals and MDE) against."""

T_2_975 = 4.302652729911275
T_10_975 = 2.2281388519649385
T_30_995 = 2.749995653567353
T_2_80, T_4_975, T_4_80 = 1.0606601717798212, 2.7764451051977987, 0.9409645772358
Z_975, Z_80 = 1.959963984540054, 0.8416212335729143
