"""Parameter servers: worker and server sides of ps_bsp, asp, ssp and osp."""
