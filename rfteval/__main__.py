from rfteval.cli import main

main()
