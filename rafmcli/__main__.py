from rafmcli.entry import run

run()
