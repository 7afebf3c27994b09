"""Side stages in modules of their own (README, "Adding a side stage"); registered in tasks/stage_list.py."""
