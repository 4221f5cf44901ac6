module kvblock.example/kvblock

go 1.19
